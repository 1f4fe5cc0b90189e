end
if mine then
  return 1
end
return 0
